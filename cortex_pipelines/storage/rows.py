"""Result rows as dicts keyed by column name, for code that reads a cursor inside a transaction."""

from __future__ import annotations


def dict_rows(cur) -> list[dict]:
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
