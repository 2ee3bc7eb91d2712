-- table: brews
-- generated: dish
-- A dish to serve with each beer (llm_map: short prompts, answers of a few words; the rows of one
-- beer share their prompt)
SELECT id, llm_map('{beer} ({style}) from {brewery}, {region}.
Name one dish to serve with it.', beer, style, brewery, region, llm_options(max_tokens := 8)) AS dish
FROM brews
WHERE id > $offset AND id <= $offset + $rows;
