-- table: films
-- labels: genre
-- The genre of each film from its plot (llm_classify)
SELECT id, llm_classify('Plot: {plot}
Which genre fits this film best?', ['comedy', 'drama', 'thriller', 'horror', 'action', 'family', 'documentary'], plot) AS genre
FROM films
WHERE id > $offset AND id <= $offset + $rows;
