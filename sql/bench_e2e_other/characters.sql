-- table: films
-- generated: cast_info
-- The lead character and the setting of each film as JSON (llm_extract)
SELECT id, llm_extract('Plot: {plot}
Name the main character and where the story takes place.',
    '{"type": "object", "properties": {"character": {"type": "string"}, "place": {"type": "string"}}, "required": ["character", "place"]}',
    plot, llm_options(max_tokens := 32)) AS cast_info
FROM films
WHERE id > $offset AND id <= $offset + $rows;
