"""Reranking (``/v1/rerank`` and ``/rerank``) in the shape llama-server, OVMS, Jina and Cohere
share: a query, documents, ``top_n``; results sorted by relevance.

The request and response models are in :mod:`.protocol`, the call to the engine in
:mod:`.serving`, the routes in :mod:`.routes`. A reranker runs in the engine worker beside
the chat model, as embedding models do.
"""
