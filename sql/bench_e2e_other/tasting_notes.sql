-- table: ratings
-- generated: note
-- A tasting note per rating (llm_map: short prompts; a beer rated many times repeats its prompt)
SELECT id, llm_map('Beer: {beer} ({style}). Taste score {taste}, palate {palate}.
Write a short tasting note.', beer, style, taste, palate, llm_options(max_tokens := 24)) AS note
FROM ratings
WHERE id > $offset AND id <= $offset + $rows;
