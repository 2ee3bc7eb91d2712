-- table: products
-- filter: rows
-- generated: problem
-- The negative reviews, and what went wrong in each (llm_filter, then llm_map on the rows it keeps)
SELECT id, llm_map('Product: {name}
Review: {text}
In at most six words, what went wrong?', name, text, llm_options(max_tokens := 10)) AS problem
FROM (SELECT * FROM products WHERE id > $offset AND id <= $offset + $rows) AS p
WHERE llm_filter('Is this product review negative? Review: {text}', text);
