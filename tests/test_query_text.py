"""Natural-language queries to full-text queries."""

from hypothesis import given
from hypothesis import strategies as st

from memory.query_text import content_words, or_tsquery


def test_question_words_and_filler_are_dropped() -> None:
    assert content_words("When did Caroline go to the LGBTQ support group?") == [
        "caroline", "lgbtq", "support", "group",
    ]


def test_or_query_joins_distinct_words() -> None:
    assert or_tsquery("coffee, coffee and sleep") == "coffee | sleep"
    assert or_tsquery("what is it?") == ""


@given(st.text())
def test_result_only_holds_words_and_operators(text: str) -> None:
    query = or_tsquery(text)
    for term in query.split(" | ") if query else []:
        assert term and all(ch.isalnum() for ch in term)


async def test_postgres_accepts_any_or_query(raw_db) -> None:  # type: ignore[no-untyped-def]
    for text in ["it's Mary’s dog!", "a & b | !c (d) :* 'e'", "ÜBER café — naïve", "x"]:
        q = or_tsquery(text)
        await raw_db.fetchval("SELECT to_tsquery('english', $1)", q)
