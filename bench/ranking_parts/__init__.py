"""Parts of the ranking benchmark (``bench/ranking.py``): the SciFact data, the retrieval
engines, their SearXNG- and Brave-shaped HTTP servers, the fusion methods and the tuning."""
