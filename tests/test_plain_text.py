"""searcher.fetch.plain_text: extracted markdown as plain text (Tavily's format "text")."""

from searcher.fetch.plain_text import plain_text

MARKDOWN = """# A heading

Some text with a [link](http://127.0.0.1/x) and `code`,
on two lines.

- one
- two
  1. nested
  2. nested again

> quoted

| name | value |
|---|---|
| a | 1 |

```
kept   as it is
```

---
5 * 3 = 15, not_a_link [x] and ![alt text](http://127.0.0.1/i.png)."""

PLAIN = """A heading

Some text with a link and code,
on two lines.

- one
- two
  1. nested
  2. nested again

quoted

name\tvalue
a\t1

kept   as it is

5 * 3 = 15, not_a_link [x] and alt text."""


def test_markdown_marks_go_and_the_words_stay():
    assert plain_text(MARKDOWN) == PLAIN


def test_text_without_markup_is_itself_and_nothing_is_nothing():
    assert plain_text("Just a sentence.") == "Just a sentence."
    assert plain_text("") == ""
    assert plain_text("7. Seventh\n8. Eighth") == "7. Seventh\n8. Eighth"
