"""Bridges to the frameworks users build and track retrieval with. Each module imports its
framework lazily, and is an optional extra: ``rankgate[langchain]``, ``rankgate[llamaindex]``,
``rankgate[mlflow]``."""
