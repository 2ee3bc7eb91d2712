-- LLM functions in DuckDB, with relserve.
--
-- Run the whole file planned (one relQuery per call site):
--     python -c "import duckdb, relserve.duckdb as r; c = duckdb.connect(); \
--                print(r.sql(c, open('sql/duckdb_examples.sql').read()))"
-- or statement by statement on a connection after relserve.duckdb.install(con), where each
-- chunk of 2,048 rows is one relQuery.

CREATE OR REPLACE TABLE reviews AS
SELECT * FROM (VALUES
    (1, 'Alien',  'A tense, beautifully made film.',        5),
    (2, 'Alien',  'Too slow for me, I left early.',         2),
    (3, 'Heat',   'Two great actors at their best.',        5),
    (4, 'Heat',   'A tense, beautifully made film.',        4),
    (5, 'Up',     NULL,                                     3),
    (6, 'Up',     'Made me cry, in the best way.',          5)
) AS t(id, movie, review, stars);

-- Free text. Placeholders take the value arguments in order of first appearance.
SELECT id, llm_map('Summarize this review in five words: {review}', review) AS summary
FROM reviews;

-- Several columns: one value per placeholder, in order ...
SELECT id, llm_map('Movie: {movie}. Review: {review}. What did the critic like?', movie, review) AS liked
FROM reviews;

-- ... or one struct, bound by field name: a table alias is the whole row.
SELECT id, llm_map('Movie: {movie}. Review: {review}. What did the critic like?', r) AS liked
FROM reviews AS r;

-- A yes/no question is a BOOLEAN, usable in WHERE; rows with a NULL review get NULL.
SELECT id, review
FROM reviews
WHERE llm_filter('Is this movie review positive? {review}', review);

-- One of the given labels (constrained decoding).
SELECT id, llm_classify('What is the tone of this review? {review}', ['enthusiastic', 'mixed', 'negative'], review) AS tone
FROM reviews;

-- JSON valid against a JSON schema (structured output); the result has DuckDB's JSON type.
SELECT id,
       llm_extract(
           'Extract what the critic praised and criticised: {review}',
           '{"type": "object",
             "properties": {"praised": {"type": "string"}, "criticised": {"type": "string"}},
             "required": ["praised", "criticised"]}',
           review,
           llm_options(max_tokens := 64)
       ) AS points
FROM reviews;

-- Options go last, through llm_options(...): model, max_tokens, temperature, system, on_error
-- ('null': a failed row is NULL and listed by relserve.duckdb.errors(con); 'raise': the
-- statement fails), reorder_fields (let the planner put each row's fields in the order that
-- shares the most prefix; the row is then given to the model as {"field": value} JSON).
SELECT id, llm_map('Movie {movie}, {stars} stars: {review}. One word:', r,
                   llm_options(max_tokens := 4, reorder_fields := true)) AS word
FROM reviews AS r;

-- CTEs and joins: the classification runs first, the map only on the rows it keeps.
WITH toned AS (
    SELECT id, movie, review,
           llm_classify('Tone of this review: {review}', ['positive', 'negative'], review) AS tone
    FROM reviews
)
SELECT t.id, t.movie, llm_map('Why is this review negative? {review}', t.review) AS why
FROM toned AS t JOIN (SELECT DISTINCT movie FROM reviews) AS m USING (movie)
WHERE t.tone = 'negative';

-- Statements that change data run once, with every call site planned.
CREATE OR REPLACE TABLE review_tones AS
SELECT id, llm_classify('Tone of this review: {review}', ['positive', 'negative'], review) AS tone
FROM reviews;

UPDATE review_tones
SET tone = 'unknown'
WHERE tone IS NULL;

SELECT * FROM review_tones ORDER BY id;
