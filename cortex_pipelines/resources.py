"""Dagster resources, one per dependency, so every asset, check and sensor asks only for what it
uses (and a test swaps one, such as the LLM, without touching the rest).

Dagster builds resources anew for each run and each sensor evaluation, so settings are read then,
once per resource: a changed config.toml applies to the next run, never halfway through one.
"""

from dagster import ConfigurableResource
from pydantic import PrivateAttr

from cortex_pipelines.config import Settings, load_settings
from cortex_pipelines.llm import LLMClient, make_client
from cortex_pipelines.memory.embedder import Embedder, embedder_for
from cortex_pipelines.memory.vectors import VectorStore, vector_store
from cortex_pipelines.storage import Database


class SettingsResource(ConfigurableResource):
    """Which CORTEX_HOME to work on; empty means the CORTEX_HOME environment variable."""

    home: str | None = None
    _settings: Settings | None = PrivateAttr(default=None)

    def get(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.home)
        return self._settings


class DatabaseResource(ConfigurableResource):
    settings: SettingsResource

    def get(self) -> Database:
        return Database(self.settings.get().paths.db)


class VectorsResource(ConfigurableResource):
    settings: SettingsResource

    def get(self) -> VectorStore:
        return vector_store(self.settings.get().paths.lance)


class EmbedderResource(ConfigurableResource):
    """The embedding model the settings name; it loads on first use, once per process."""

    settings: SettingsResource

    def get(self) -> Embedder:
        return embedder_for(self.settings.get())


class LLMResource(ConfigurableResource):
    settings: SettingsResource

    def client(self, purpose: str = "reply") -> LLMClient:
        return make_client(self.settings.get(), purpose)

    def memory_client(self) -> LLMClient | None:
        """The extraction model, or None when the offline patterns do the work."""
        settings = self.settings.get()
        return None if settings.llm_provider == "offline" else make_client(settings, "extraction")


def cortex_resources(home: str | None = None) -> dict[str, ConfigurableResource]:
    """Every resource of one CORTEX_HOME, under the names the definitions ask for."""
    settings = SettingsResource(home=home)
    return {
        "settings": settings,
        "database": DatabaseResource(settings=settings),
        "vectors": VectorsResource(settings=settings),
        "embedder": EmbedderResource(settings=settings),
        "llm": LLMResource(settings=settings),
    }
