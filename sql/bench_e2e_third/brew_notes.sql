-- table: brews
-- generated: notes
-- The flavours a beer review names and whether the reviewer would drink it again, as JSON (llm_extract)
SELECT id, llm_extract('Beer: {beer} from {brewery}
Review: {review}
List the flavours the reviewer names, and say whether they would drink it again.',
    '{"type": "object", "properties": {"flavours": {"type": "string"}, "again": {"type": "boolean"}}, "required": ["flavours", "again"]}',
    beer, brewery, review, llm_options(max_tokens := 64)) AS notes
FROM brews
WHERE id > $offset AND id <= $offset + $rows;
