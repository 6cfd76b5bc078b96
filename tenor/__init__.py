"""tenor: serve large language models as a cell of model servers."""

__version__ = "0.1.0"
