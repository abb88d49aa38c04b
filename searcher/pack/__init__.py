"""The context pack: passages chosen within and across pages, and the layout that renders
them under a character budget."""
