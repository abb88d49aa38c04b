"""The layout returns a typed pack: its text, the numbers of the items it shows and, in
full mode, the passages each page gave. Nobody parses the text again to learn them."""

import re

from searcher.llm.answer import check_citations
from searcher.pack.layout import PackItem, layout_pack, render_context_pack

ITEM_HEAD = re.compile(r"^(\d+)\. Title: ", re.MULTILINE)


def _items(n):
    return [
        PackItem(
            f"Result {i} about ranking functions and their history",
            f"https://site{i}.example/articles/{'x' * (i * 13 % 90)}",
            f"Snippet {i}: " + "BM25 weighs term frequency against document length. " * (i % 4),
            ("Page text. " * (40 * i)) if i % 2 else None,
        )
        for i in range(1, n + 1)
    ]


def test_the_pack_names_the_items_its_text_shows():
    items = _items(8)
    for budget in range(0, 6000, 97):
        pack = layout_pack(items, query="bm25", backend="searxng", mode="full", max_chars=budget)
        assert pack.text == render_context_pack(
            items, query="bm25", backend="searxng", mode="full", max_chars=budget
        )
        assert pack.numbers == tuple(int(n) for n in ITEM_HEAD.findall(pack.text)), budget
        assert pack.items_shown == len(pack.numbers)
        assert pack.passages is None  # chosen across pages only by the assemble stage


def test_an_item_left_out_before_a_shown_one_is_not_taken_as_shown():
    # The first item's floor (a 100-character URL, 40 of title, 60 of snippet) does not
    # fit; the second, small one does. Counting item heads said "1 shown", so a citation
    # of [1] was kept and one of [2], the item the model read, removed.
    first = PackItem("A long title about the first result " * 3, "https://a.example/" + "p" * 200,
                     "A snippet that runs on and on " * 5)  # fmt: skip
    second = PackItem("B", "https://b.example/", "")
    pack = layout_pack([first, second], query="q", backend="b", mode="simple", max_chars=400)
    assert pack.numbers == (2,)
    assert "2. Title: B" in pack.text and "1. Title:" not in pack.text
    checked = check_citations("The first [1]. The second [2].", set(pack.numbers))
    assert checked.refs == [2] and checked.removed == [1]
    assert checked.text == "The first. The second [2]."


def test_an_empty_pack_shows_nothing():
    pack = layout_pack(_items(3), query="q", backend="b", mode="simple", max_chars=50)
    assert pack.text == "" and pack.numbers == () and pack.items_shown == 0
    pack = layout_pack([], query="q", backend="b", mode="simple", max_chars=2000)
    assert "(no results)" in pack.text and pack.numbers == ()
