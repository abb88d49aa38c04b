"""Ranking: fusion of backends' lists, near-duplicate merging, relevance, hybrid and
LLM-free reranking, the selection of what a response carries, and ranking evaluation."""
