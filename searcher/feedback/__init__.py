"""Feedback from the agents that use the results (seed 000 §6.2): which results of a
search were used, cited or not relevant, kept with the search in the state store."""
