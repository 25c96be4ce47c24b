"""One settings model for the whole instance: CORTEX_* environment variables over an optional
$CORTEX_HOME/config.toml, validated up front so a typo fails with one line naming the key."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import tomllib
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from cortex_pipelines.memory.models import DEFAULT_MODEL, INSTALLABLE, cached_model, installed_folder

ChannelMode = Literal["off", "shadow", "live"]
CHANNEL_PATTERN = r"^[a-z0-9_-]{1,32}$"
BUILTIN_CHANNELS = frozenset(
    {"webchat", "telegram", "whatsapp", "signal", "discord", "slack", "email", "cron", "router", "admin"}
)

ADMIN_CHANNEL = "admin"
# Seed 002's memory tools, which the brain offers the owner on every channel unless CORTEX_MEMORY_TOOLS
# names fewer (the admin channel always has them all; memory_query is always offered).
MEMORY_TOOL_NAMES = (
    "memory_save",
    "memory_update",
    "memory_edit",
    "memory_move",
    "memory_forget",
    "memory_unforget",
    "memory_dedupe",
    "memory_stats",
    "memory_recent",
    "pin_add",
    "pin_list",
    "pin_remove",
    "pin_clear",
)
ROUTER_CHANNEL = "router"
# A schedule's firing: on this channel from this sender it speaks for the owner (who made the
# schedule), so only the scheduler writes it (ingest/envelope.py).
SCHEDULE_CHANNEL = "cron"
SCHEDULE_SENDER = "scheduler"
# A firing's external id is "<job id>@<due time>", its job's id this prefix and 8 hex digits.
SCHEDULE_ID_PREFIX = "sch-"
ANY_CHANNEL = "*"
# Who the owner is when nothing says otherwise: `cortex send`'s default sender and the demo's persona on
# every channel, and the router's own sender id for delegated results. A configured channel replaces its
# entry; configuring "*" replaces the fallback for channels without one.
DEFAULT_OWNERS: dict[str, tuple[str, ...]] = {ANY_CHANNEL: ("user", "maya"), ROUTER_CHANNEL: ("router",)}


def is_firing(channel: str, sender: str | None) -> bool:
    """Whether a message is a schedule's firing: only the scheduler writes one (ingest/envelope.py),
    so its metadata (the reply's channel, the reminder) is Cortex's own; another sender's on `cron`
    is an ordinary message, whatever its metadata says."""
    return channel == SCHEDULE_CHANNEL and sender == SCHEDULE_SENDER


class ModelPrice(BaseModel):
    """USD per million tokens: input, output, a 5-minute cache write, a cache read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write: float = Field(ge=0)
    cache_read: float = Field(ge=0)


# Anthropic's list prices (USD per million tokens) for the default models; CORTEX_LLM_PRICES adds
# or replaces models. Used for cost estimates only, never for billing.
DEFAULT_PRICES: dict[str, ModelPrice] = {
    "claude-sonnet-4-6": ModelPrice(input=3.0, output=15.0, cache_write=3.75, cache_read=0.30),
    "claude-haiku-4-5": ModelPrice(input=1.0, output=5.0, cache_write=1.25, cache_read=0.10),
}


class _ConfigToml(TomlConfigSettingsSource):
    """config.toml as Windows editors save it too: a UTF-8 byte-order mark had read as "Invalid
    statement (at line 1, column 1)"."""

    def _read_file(self, file_path) -> dict:
        return tomllib.loads(file_path.read_text(encoding="utf-8-sig"))


class ConfigError(ValueError):
    """A configuration value is invalid; the message is one line naming the key."""


# Invisible characters that are not format (Cf) ones, refused anywhere in a sender id: the combining
# grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian free variation selectors.
_INVISIBLE = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\uffa0]")
# Emoji need these: variation selectors (❤️), and a flag's tag characters after 🏴 up to CANCEL TAG.
_VARIATION = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]")
_FLAG = re.compile("\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f")
_JOINERS = "\u200c\u200d"  # ZWNJ (Persian, Indic names), ZWJ (emoji sequences)
_REFUSED_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def _varies(sender: str, i: int) -> bool:
    r"""Whether the variation selector at sender[i] follows what it can vary (a symbol such as ❤, a
    CJK ideograph, a keycap's digit): after "ana" it only hides, and "ana\ufe0f" shows as "ana"."""
    base = sender[i - 1] if i else ""
    return bool(base) and (
        unicodedata.category(base)[0] in "SP"
        or unicodedata.name(base, "").startswith("CJK ")
        or (base in "0123456789" and sender[i + 1 : i + 2] == "\u20e3")
    )


def check_sender_id(sender: str) -> str:
    r"""A sender id as every entry path and the owners setting accept it, or ValueError with why: it
    decides who the owner is, so "ana ", "ana\u200b" or "ana\nfake" must not pass for, or display as,
    "ana"; yet real names need NBSP, ZWNJ (Persian), ZWJ and variation selectors (emoji) inside."""
    if not sender.strip():
        raise ValueError("is blank")
    if sender != sender.strip():
        raise ValueError("has leading or trailing whitespace")
    flags = {i for m in _FLAG.finditer(sender) for i in range(m.start() + 1, m.end())}
    for i, char in enumerate(sender):
        if _VARIATION.match(char):
            hides = not _varies(sender, i)
        else:
            refused = unicodedata.category(char) in _REFUSED_CATEGORIES or _INVISIBLE.match(char)
            hides = bool(refused) and char not in _JOINERS and i not in flags
        if hides:
            raise ValueError(f"contains {_code(char)}, an invisible or control character")
    for where, char in (("starts", sender[0]), ("ends", sender[-1])):
        if char in _JOINERS:
            raise ValueError(f"{where} with {_code(char)}, an invisible character")
    for i, char in enumerate(sender):  # joining nothing: "an\u200da" shows as "ana"
        if char in _JOINERS and sender[i - 1].isascii() and sender[i + 1].isascii():
            raise ValueError(f"contains {_code(char)} between two plain letters, an invisible character")
    return sender


def _code(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, '')}".strip()


def check_telegram_ids(channel: str, senders: list[str], what: str) -> None:
    """The Telegram connector names a sender by their user id, a number; "@maya_user" was taken and
    then matched no message, every one skipped with only a log line to say so (QA, helper-54)."""
    for sender in senders if channel == "telegram" else ():
        if sender.startswith("@"):
            raise ValueError(
                f"telegram: {what} {sender!r} is not a Telegram user id: give the number (message "
                "@userinfobot to learn yours), not a username"
            )


def check_owners(owners: dict[str, list[str]]) -> dict[str, list[str]]:
    for name, senders in owners.items():
        if name != ANY_CHANNEL and not re.match(CHANNEL_PATTERN, name):
            raise ValueError(f"channel name {name!r} must match {CHANNEL_PATTERN} or be '*'")
        for sender in senders:
            try:
                check_sender_id(sender)
            except ValueError as exc:
                raise ValueError(f"{name}: owner sender id {sender!r} {exc}") from None
        check_telegram_ids(name, senders, "owner sender id")
    return owners


def parse_owners(text: str) -> dict[str, list[str]]:
    """'telegram:12345,webchat:user' → {"telegram": ["12345"], "webchat": ["user"]}; ValueError if bad."""
    owners: dict[str, list[str]] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        channel, sep, sender = (part.strip() for part in pair.partition(":"))
        if not (sep and channel and sender):
            raise ValueError(f"{pair!r} is not CHANNEL:SENDER_ID")
        owners.setdefault(channel, []).append(sender)
    return check_owners(owners)


def cortex_home(explicit: str | os.PathLike[str] | None = None) -> Path:
    return Path(explicit or os.environ.get("CORTEX_HOME") or ".cortex").expanduser().resolve()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="CORTEX_", extra="forbid", validate_default=True, frozen=True
    )

    home: Path = Field(default_factory=cortex_home)

    # Channels
    default_mode: ChannelMode = "live"
    channel_modes: dict[str, ChannelMode] = {}
    channels: list[str] = Field(default=[], description="extra channel names beyond the builtins")
    sender_allowlist: dict[str, list[str]] = {}
    owners: Annotated[dict[str, list[str]], NoDecode] = Field(
        default={}, description="owner sender ids per channel, over DEFAULT_OWNERS"
    )

    # Context budgets (seed 000)
    context_total_tokens: int = Field(16000, ge=1000)
    foreground_max_messages: int = Field(20, ge=1)
    foreground_max_tokens: int = Field(4000, ge=100)
    background_idle_hours: float = Field(24.0, gt=0)
    # The background layer's lines (one per other active conversation), then "+N more".
    background_max_lines: int = Field(10, ge=0)
    known_facts_in_floor: int = Field(50, ge=0)
    # Auto-recall (seeds 001 and 002): the top memories for each owner message go into its
    # context; 0 turns it off. Their block stays within this many tokens.
    recall_in_context: int = Field(6, ge=0, le=20)
    recall_context_tokens: int = Field(1500, ge=100)
    # How recall weighs its signals: a named RecallConfig (memory/recall_config.py).
    recall_preset: str = "default"
    # Which of seed 002's memory tools the owner gets outside the admin channel: "all", "none", or
    # names (comma-separated or a JSON list).
    memory_tools: Annotated[tuple[str, ...], NoDecode] = MEMORY_TOOL_NAMES

    # LLM
    llm_provider: Literal["offline", "anthropic"] = "offline"
    model: str = "claude-sonnet-4-6"
    extraction_model: str = "claude-haiku-4-5"
    base_url: str | None = None
    api_key: SecretStr | None = None
    llm_timeout_s: float = Field(60.0, gt=0)
    llm_retries: int = Field(3, ge=0, le=10)
    max_output_tokens: int = Field(1024, ge=16)
    max_tool_rounds: int = Field(5, ge=0, le=20)
    # The stable head of the brain's system prompt (and the tools before it) is marked for the
    # API's prompt cache; off for a Messages server that refuses cache_control.
    prompt_caching: bool = True
    # Per-model prices over DEFAULT_PRICES, e.g. {"claude-opus-4-6": {"input": 5, "output": 25,
    # "cache_write": 6.25, "cache_read": 0.5}}: what `cortex status` and asset metadata estimate.
    llm_prices: dict[str, ModelPrice] = {}
    # Daily token budgets per purpose (tokens in, cached ones included, and out since midnight UTC).
    # Once spent, a run uses the deterministic path instead: the offline model for replies, the
    # pattern extraction, the offline summary, the offline observations (the bulletin: its typed
    # render). Checked before each run (replies, extraction, summaries, observations) or call.
    reply_daily_token_budget: int = Field(2_000_000, ge=0)
    extraction_daily_token_budget: int = Field(200_000, ge=0)
    summary_daily_token_budget: int = Field(50_000, ge=0)
    observations_daily_token_budget: int = Field(20_000, ge=0)

    # Processing
    max_attempts: int = Field(3, ge=1)
    retry_backoff_s: float = Field(30.0, ge=0)
    lease_timeout_s: float = Field(900.0, gt=0)
    # A processing run that `cortex dev` started keeps watching for new messages this long after it
    # answered the last one, so a conversation is answered at once (brain/linger.py); 0: it ends
    # as soon as the bus is empty.
    brain_linger_seconds: float = Field(120.0, ge=0, le=1800)
    op_deadline_hours: float = Field(24.0, gt=0)
    stuck_after_s: float = Field(600.0, gt=0, description="processing this long with no live drainer")
    # Seed 001's turn TTL, off by default: verbatim messages older than this many days are erased
    # (what was learnt from them stays, citing them by id).
    turn_ttl_days: int | None = Field(None, ge=1)

    # Schedules (seed 001)
    schedule_grace_s: float = Field(120.0, gt=0, description="a firing found later than this is marked late")

    # Memory (seeds 000, 001, 002, 004)
    embedding_model: str = DEFAULT_MODEL
    embedding_device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    embedding_batch_size: int = Field(64, ge=1)
    extraction_every_turns: int = Field(6, ge=1)
    dedupe_cosine: float = Field(0.95, gt=0, le=1)
    hot_cap: int = Field(500, ge=1)
    cold_after_days: float = Field(14.0, gt=0)
    cold_min_hits: int = Field(3, ge=0)
    decay_factor: float = Field(0.95, gt=0, le=1)
    decay_after_days: float = Field(30.0, ge=0)
    decay_floor: float = Field(0.05, ge=0, le=1)
    prune_threshold: float = Field(0.1, ge=0, le=1)
    prune_min_age_days: float = Field(30.0, ge=0)
    merge_cosine: float = Field(0.95, gt=0, le=1)
    consolidate_cosine: float = Field(0.9, gt=0, le=1)
    op_archive_days: float = Field(7.0, ge=0)
    compaction_idle_minutes: float = Field(60.0, ge=0)
    recency_half_life_hours: float = Field(48.0, gt=0)
    vector_index_min_rows: int = Field(10_000, ge=256)

    # Published memory (seeds 003, 004)
    boot_max_chars: int = Field(16000, ge=2000, le=64000)
    boot_threads: int = Field(7, ge=1, le=20)
    boot_decisions: int = Field(10, ge=1, le=30)
    decision_recency_days: float = Field(14.0, gt=0)
    decision_dedupe_hours: float = Field(24.0, gt=0)
    thread_prune_days: float = Field(7.0, gt=0)
    max_threads: int = Field(50, ge=5, le=200)
    bulletin_refresh_minutes: float = Field(60.0, gt=0)
    bulletin_words: int = Field(500, ge=100)
    bulletin_daily_token_budget: int = Field(20000, ge=0)
    timezone: str = "UTC"

    # Ingest limits
    max_text_bytes: int = Field(64 * 1024, ge=1)
    max_file_bytes: int = Field(32 * 1024 * 1024, ge=1)

    # The HTTP gateway (`cortex serve`) and its connectors
    ingest_api_key: SecretStr | None = Field(None, description="the gateway's bearer key; no key, no gateway")
    gateway_port: int = Field(7751, ge=1, le=65535)
    outbox_lease_seconds: float = Field(60.0, gt=0)
    outbox_max_attempts: int = Field(10, ge=1)
    telegram_token: SecretStr | None = None
    telegram_api_base: str = "https://api.telegram.org"
    telegram_send_timeout: float = Field(
        20.0, gt=0, description="seconds to wait for sendMessage's answer once the request is sent"
    )

    # Stores
    backup_keep: int = Field(7, ge=1, description="DuckDB backups kept in $CORTEX_HOME/backups")
    # Dagster's run history (runs, their event logs and compute logs) is pruned of finished runs
    # older than this many days (storage/run_history.py); 0 keeps every run.
    run_history_days: int = Field(30, ge=0, le=36500)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        explicit_home = getattr(init_settings, "init_kwargs", {}).get("home")
        toml_file = Paths(cortex_home(explicit_home)).config_file
        return (
            init_settings,
            env_settings,
            _ConfigToml(settings_cls, toml_file=toml_file),
        )

    @field_validator("memory_tools", mode="before")
    @classmethod
    def _tool_names(cls, value: object) -> object:
        if isinstance(value, str):
            words = value.strip()
            if words.startswith("["):
                return json.loads(words)
            if words.lower() in ("all", "none"):
                return MEMORY_TOOL_NAMES if words.lower() == "all" else ()
            return [w.strip() for w in words.split(",") if w.strip()]
        return value

    @field_validator("memory_tools")
    @classmethod
    def _known_tools(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [n for n in names if n not in MEMORY_TOOL_NAMES]
        if unknown:
            known = ", ".join(MEMORY_TOOL_NAMES)
            raise ValueError(f"unknown tool {unknown[0]!r}; use all, none or some of {known}")
        return tuple(dict.fromkeys(names))

    @field_validator("home", mode="before")
    @classmethod
    def _absolute_home(cls, value: object) -> Path:
        """CORTEX_HOME as an absolute path (an empty one counts as unset): a relative one made
        `cortex run` fail on Dagster's relative DAGSTER_HOME, with a traceback."""
        return cortex_home(value or None)

    @field_validator("recall_preset")
    @classmethod
    def _known_preset(cls, name: str) -> str:
        from cortex_pipelines.memory.recall_config import preset

        preset(name)  # raises with the list of presets
        return name

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, name: str) -> str:
        """An unknown zone passed `cortex status`, then failed every run, and the third failure
        marked the message failed as if its run had died."""
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder such as "America"
            raise ValueError(f"unknown timezone {name!r} (use an IANA name like Europe/Berlin)") from None
        return name

    @field_validator("embedding_model")
    @classmethod
    def _model_folder(cls, model: str) -> str:
        """A model that cannot load offline fails here, in one line, not in every command that
        embeds: a folder without a model, or a name neither shipped, installed nor cached."""
        if model in INSTALLABLE:
            installed_folder(model)  # else one line naming `cortex model install`
            return model
        if model.startswith(("/", "~", ".")) or model.count("/") > 1 or Path(model).is_dir():
            folder = Path(model).expanduser().resolve()  # one name per folder: it names the vectors
            if not (folder / "modules.json").is_file() and not (folder / "config.json").is_file():
                raise ValueError(f"{model!r} is not a sentence-transformers model folder")
            return str(folder)
        if not cached_model(model):
            raise ValueError(
                f"{model!r} is not a model on this machine: nothing is downloaded at run time; give "
                f"a model folder, {DEFAULT_MODEL}, or one of {', '.join(INSTALLABLE)} "
                "(`cortex model install`)"
            )
        return model

    @field_validator("channel_modes", "sender_allowlist")
    @classmethod
    def _channel_names(cls, value: dict) -> dict:
        for name in value:
            if not re.match(CHANNEL_PATTERN, name):
                raise ValueError(f"channel name {name!r} must match {CHANNEL_PATTERN}")
        return value

    @field_validator("sender_allowlist")
    @classmethod
    def _telegram_allowlist(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, senders in value.items():
            check_telegram_ids(name, senders, "allowlisted sender")
        return value

    @field_validator("telegram_token", mode="before")
    @classmethod
    def _empty_token_is_unset(cls, value: object) -> object:
        """`CORTEX_TELEGRAM_TOKEN=` (empty, as a template leaves it) means no Telegram, as unset does;
        it had refused `cortex serve` with "CORTEX_TELEGRAM_TOKEN is not set"."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("telegram_api_base")
    @classmethod
    def _a_url(cls, value: str) -> str:
        """A base that is no URL had read as "Telegram unreachable", retried for ever."""
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{value!r} is not an http(s) URL (default https://api.telegram.org)")
        return value

    @field_validator("owners", "channel_modes", "sender_allowlist", "llm_prices", mode="before")
    @classmethod
    def _no_setting_inside(cls, value: object, info: ValidationInfo) -> object:
        """A setting appended to config.toml below a table (`init --owner` wrote `[owners]`) is read
        as part of it: say so, not "CORTEX_OWNERS: timezone: Input should be a valid list"."""
        table = info.field_name
        for key in value if isinstance(value, dict) else ():
            if key in cls.model_fields:
                raise PydanticCustomError(
                    "setting_in_table",
                    f"{key!r} sits inside config.toml's [{table}] table: move it above the [{table}] "
                    "line, where settings go",
                )
        return value

    @field_validator("owners", mode="before")
    @classmethod
    def _owner_pairs(cls, value: object) -> object:
        """CORTEX_OWNERS is "telegram:12345,webchat:user" (or a JSON object); config.toml a table."""
        if isinstance(value, str):
            return json.loads(value) if value.lstrip().startswith("{") else parse_owners(value)
        return value

    @field_validator("owners")
    @classmethod
    def _owner_channels(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        return check_owners(value)

    def owner_ids(self, channel: str) -> frozenset[str]:
        merged = {**DEFAULT_OWNERS, **self.owners}
        return frozenset(merged.get(channel, merged[ANY_CHANNEL]))

    def is_owner(self, channel: str, sender: str | None) -> bool:
        """The owner's own words: the only source of facts about the user (the admin channel is the
        owner's terminal). On the router channel, the senders whose results complete delegated ops."""
        return channel == ADMIN_CHANNEL or (sender is not None and sender in self.owner_ids(channel))

    def said_by_owner(self, channel: str, sender: str | None) -> bool:
        """Whether a turn holds the user's own words: an owner's, never a router result. The router's
        senders own that channel only to complete delegated work; what they send is another
        agent's text, untrusted."""
        return channel != ROUTER_CHANNEL and self.is_owner(channel, sender)

    def speaks_for_owner(self, channel: str, sender: str | None) -> bool:
        """Whether a turn acts, and is shown, as the owner's: their own words, or the firing of a
        schedule they made (only the scheduler writes one), which is no source of facts about them."""
        return is_firing(channel, sender) or self.said_by_owner(channel, sender)

    def mode_for(self, channel: str) -> ChannelMode:
        if channel == ADMIN_CHANNEL:  # the owner's own terminal (`cortex chat`) is always answered
            return "live"
        return self.channel_modes.get(channel, self.default_mode)

    def known_channels(self) -> frozenset[str]:
        return BUILTIN_CHANNELS | set(self.channel_modes) | set(self.channels)

    def channel_hint(self, name: str) -> str:
        """ " (did you mean 'webchat'?)" for a channel name a typo away from a known one, else ""."""
        near = difflib.get_close_matches(name, sorted(self.known_channels() - {ADMIN_CHANNEL}), n=1)
        return f" (did you mean {near[0]!r}?)" if near else ""

    def sender_allowed(self, channel: str, sender: str | None) -> bool:
        allowed = self.sender_allowlist.get(channel)
        return allowed is None or (sender is not None and sender in allowed)

    def price_for(self, model: str) -> ModelPrice | None:
        return {**DEFAULT_PRICES, **self.llm_prices}.get(model)

    def daily_token_budget(self, purpose: str) -> int:
        """The daily token budget of an LLM purpose (an LLM-backed asset's calls)."""
        return {
            "reply": self.reply_daily_token_budget,
            "extraction": self.extraction_daily_token_budget,
            "summary": self.summary_daily_token_budget,
            "observations": self.observations_daily_token_budget,
            "bulletin": self.bulletin_daily_token_budget,
        }[purpose]

    def resolved_api_key(self) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        return os.environ.get("ANTHROPIC_API_KEY")

    def resolved_base_url(self) -> str | None:
        """CORTEX_BASE_URL, else ANTHROPIC_BASE_URL (which the SDK reads by itself)."""
        return self.base_url or os.environ.get("ANTHROPIC_BASE_URL") or None

    def model_access(self) -> str:
        """A short digest of how replies reach the model (provider, key, base URL, model). Part of a
        processing run's key: messages a refused key left waiting keep their key (put back
        uncounted), so a run is asked for them again when the key is fixed, and not before."""
        said = [self.llm_provider, self.resolved_api_key() or "", self.resolved_base_url() or "", self.model]
        return hashlib.sha256("\n".join(said).encode()).hexdigest()[:8]

    @property
    def paths(self) -> Paths:
        return Paths(self.home)


@dataclass(frozen=True)
class Paths:
    """Where everything of one instance lives, all under $CORTEX_HOME."""

    home: Path

    @property
    def inbox(self) -> Path:
        return self.home / "inbox"

    @property
    def rejected(self) -> Path:
        return self.inbox / ".rejected"

    @property
    def ingested(self) -> Path:
        return self.inbox / ".ingested"

    @property
    def outbox(self) -> Path:
        return self.home / "outbox"

    @property
    def out(self) -> Path:
        return self.home / "out"

    @property
    def config_file(self) -> Path:
        return self.home / "config.toml"

    @property
    def narrative(self) -> Path:
        return self.out / "narrative.md"

    @property
    def bootstrap(self) -> Path:
        return self.out / "BOOTSTRAP.md"

    @property
    def memory_bulletin(self) -> Path:
        return self.out / "memory_bulletin.md"

    @property
    def hot_snapshot(self) -> Path:
        return self.out / "hot-snapshot.md"

    @property
    def published(self) -> dict[str, Path]:
        """The files the publish assets write, by asset name."""
        return {
            "narrative": self.narrative,
            "boot_context": self.bootstrap,
            "memory_bulletin": self.memory_bulletin,
        }

    @property
    def db(self) -> Path:
        return self.home / "cortex.duckdb"

    @property
    def connectors(self) -> Path:
        """Each connector's own state (the parts of replies it has sent)."""
        return self.home / "connectors"

    @property
    def lance(self) -> Path:
        return self.home / "lance"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster_home"

    @property
    def dagster_yaml(self) -> Path:
        return self.dagster_home / "dagster.yaml"

    @property
    def dagster_workspace(self) -> Path:
        return self.dagster_home / "workspace.yaml"

    @property
    def workspace(self) -> Path:
        return self.home / "workspace"


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    loc = first.get("loc") or ()
    key = "CORTEX_" + str(loc[0]).upper() if loc else "CORTEX_*"
    if first.get("type") == "setting_in_table":
        return first["msg"]
    if first.get("type") == "extra_forbidden":
        name = str(loc[0]).lower().removeprefix("cortex_")
        near = difflib.get_close_matches(name, sorted(Settings.model_fields), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        return f"unknown setting {str(loc[0])!r} (from config.toml or CORTEX_{name.upper()}){hint}"
    detail = first.get("msg", "invalid value").removeprefix("Value error, ")
    if len(loc) > 1:
        detail = f"{'.'.join(str(p) for p in loc[1:])}: {detail}"
    return f"{key}: {detail}"


# CORTEX_* variables that are not settings: the home folder and the test clock (clock.py).
OTHER_VARIABLES = frozenset({"CORTEX_HOME", "CORTEX_NOW"})


def _setting_variables() -> frozenset[str]:
    return frozenset(f"CORTEX_{name.upper()}" for name in Settings.model_fields)


def _unknown_variable(name: str) -> str:
    """A misspelt variable fails as a misspelt config.toml key does: silently ignored, it left the
    default in force ("CORTEX_BRAIN_LINGER_SECOND=10" kept the 120 s linger)."""
    near = difflib.get_close_matches(name, sorted(_setting_variables() | OTHER_VARIABLES), n=1)
    return f"{name}: unknown setting" + (f" (did you mean {near[0]}?)" if near else "")


def load_settings(home: str | os.PathLike[str] | None = None, **overrides: object) -> Settings:
    """Load and validate settings; raise ConfigError with a one-line reason on any bad value."""
    if home is not None:
        overrides["home"] = cortex_home(home)
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    except tomllib.TOMLDecodeError as exc:  # a ValueError too: must come before the JSON branch
        raise ConfigError(f"config.toml is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError("config.toml is not valid UTF-8") from None
    except (json.JSONDecodeError, ValueError) as exc:
        # pydantic-settings raises SettingsError (a ValueError) for unparsable JSON env values.
        field = re.search(r'field "(\w+)"', str(exc))
        key = f"CORTEX_{field.group(1).upper()}" if field else "config"
        raise ConfigError(f"{key}: not valid JSON") from None
    named = {key.upper() for key in os.environ if key.upper().startswith("CORTEX_")}  # any case, as read
    if unknown := sorted(named - OTHER_VARIABLES - _setting_variables()):
        raise ConfigError(_unknown_variable(unknown[0]))
    if (
        settings.llm_provider == "anthropic"
        and not settings.resolved_api_key()
        and not settings.resolved_base_url()
    ):
        raise ConfigError(
            "CORTEX_LLM_PROVIDER: 'anthropic' needs CORTEX_API_KEY (or ANTHROPIC_API_KEY) or CORTEX_BASE_URL "
            "(or ANTHROPIC_BASE_URL)"
        )
    return settings
