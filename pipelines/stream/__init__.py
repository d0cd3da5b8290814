"""The binlog stream into Delta, in parts named after its algorithm (engine.py lists them;
docs/architecture.md maps every module)."""

from pipelines.stream.engine import StreamEngine, StreamFailed
from pipelines.stream.state import StreamSummary

__all__ = ["StreamEngine", "StreamFailed", "StreamSummary"]
