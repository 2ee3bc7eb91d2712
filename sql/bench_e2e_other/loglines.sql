-- table: films
-- generated: logline
-- A one-sentence logline per film from its plot (llm_map: long prompts, long answers)
SELECT id, llm_map('Title: {title}
Plot: {plot}
Write a one-sentence logline for this film.', title, plot, llm_options(max_tokens := 40)) AS logline
FROM films
WHERE id > $offset AND id <= $offset + $rows;
