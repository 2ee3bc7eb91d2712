-- table: beers
-- generated: facts
-- A rating out of 5 pulled out of each beer review as JSON (llm_extract)
SELECT id, llm_extract('Beer: {beer}
Review: {review}
Rate the beer from 1 to 5 as the reviewer would.',
    '{"type": "object", "properties": {"rating": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}, "required": ["rating"]}',
    beer_name, review, llm_options(max_tokens := 16)) AS facts
FROM beers
WHERE id > $offset AND id <= $offset + $rows;
