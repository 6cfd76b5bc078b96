"""The tenor client: `Model('/tenor/<cell>/<model>').lm().generate(text)`."""

from tenor.client.client import ClientOptions, LanguageModel, Model, Sample, StreamItem

__all__ = ["ClientOptions", "LanguageModel", "Model", "Sample", "StreamItem"]
