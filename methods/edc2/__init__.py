"""EDC²-RAG: Efficient Dynamic Clustering-based document Compression (paper 004)."""

from .method import EDC2

__all__ = ["EDC2"]
