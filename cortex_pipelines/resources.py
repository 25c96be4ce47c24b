"""The one Dagster resource: an instance of Cortex (its settings, database and LLM client)."""

from dagster import ConfigurableResource

from cortex_pipelines.config import Settings, load_settings
from cortex_pipelines.llm import LLMClient, make_client
from cortex_pipelines.memory.embedder import Embedder, embedder_for
from cortex_pipelines.memory.vectors import VectorStore, vector_store
from cortex_pipelines.storage import Database


class CortexResource(ConfigurableResource):
    """Which CORTEX_HOME to work on; empty means the CORTEX_HOME environment variable."""

    home: str | None = None

    def settings(self) -> Settings:
        return load_settings(self.home)

    def database(self) -> Database:
        return Database(self.settings().paths.db)

    def llm(self, purpose: str = "reply") -> LLMClient:
        return make_client(self.settings(), purpose)

    def memory_llm(self) -> LLMClient | None:
        """The extraction model, or None when the offline patterns do the work."""
        settings = self.settings()
        return None if settings.llm_provider == "offline" else make_client(settings, "extraction")

    def vectors(self) -> VectorStore:
        return vector_store(self.settings().paths.lance)

    def embedder(self) -> Embedder:
        return embedder_for(self.settings())
