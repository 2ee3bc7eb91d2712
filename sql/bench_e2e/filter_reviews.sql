-- table: rotten
-- filter: rows
-- Which of these critic reviews recommend the movie? (llm_filter in WHERE)
SELECT id
FROM (SELECT * FROM rotten WHERE id > $offset AND id <= $offset + $rows) AS r
WHERE llm_filter('Does this critic recommend the movie? Review: {review}', review);
