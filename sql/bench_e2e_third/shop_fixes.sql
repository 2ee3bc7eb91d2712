-- table: shop
-- filter: rows
-- generated: fix
-- The reviews that report a fault, and what the seller should do about it (llm_filter on the
-- review, then llm_map over title and review: long prompts, answers of a sentence)
SELECT id, llm_map('Product: {product}
Review title: {headline}
Review: {body}
In one sentence, what should the seller change so that this buyer would be satisfied?', product, headline, body, llm_options(max_tokens := 32)) AS fix
FROM (SELECT * FROM shop WHERE id > $offset AND id <= $offset + $rows) AS s
WHERE llm_filter('Does this buyer report a fault, defect or missing part? Review: {body}', body);
