"""Pipelines on Spark: a connector coordinator that is the job protocol's initiator
(``SparkCoordinator``) and the word count over source lines (``WordCountPipeline``).
See the README beside this package."""

from .config import PipelineConfig, runner_address
from .coordinator import SparkCoordinator
from .jobtable import JobPhase, JobTable
from .wordcount import WordCountPipeline, format_batch
from .words import count_words, words

__all__ = ["JobTable", "JobPhase", "PipelineConfig", "SparkCoordinator", "WordCountPipeline",
           "count_words", "format_batch", "runner_address", "words"]
