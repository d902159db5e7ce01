"""Natural-language queries to full-text queries."""

from hypothesis import given
from hypothesis import strategies as st

from memory.retrieval.query_text import MAX_TERMS, content_text, content_words, or_tsquery


def test_question_words_and_filler_are_dropped() -> None:
    assert content_words("When did Caroline go to the LGBTQ support group?") == [
        "caroline",
        "lgbtq",
        "support",
        "group",
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


def test_content_text_is_the_words_as_plain_text() -> None:
    assert content_text("What did Caroline research? Caroline's research!") == "caroline research"
    assert content_text("what is it?") == ""


def test_numbers_and_apostrophes() -> None:
    # short numbers carry no topic; years, ages written out and possessives keep their stem word
    assert content_words("Did Mia turn 6 in 2023? It's Mia’s birthday") == [
        "mia",
        "turn",
        "2023",
        "birthday",
    ]


def test_terms_are_capped() -> None:
    words = " ".join(f"word{i}" for i in range(MAX_TERMS + 10))
    assert len(content_words(words)) == MAX_TERMS


async def test_postgres_stems_the_content_text(raw_db) -> None:  # type: ignore[no-untyped-def]
    lexemes = await raw_db.fetchval(
        "SELECT tsvector_to_array(to_tsvector('english', $1))",
        content_text("When was Nadia researching adoption agencies?"),
    )
    assert sorted(lexemes) == ["adopt", "agenc", "nadia", "research"]
