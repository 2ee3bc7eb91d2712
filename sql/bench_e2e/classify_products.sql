-- table: products
-- labels: topic
-- What is each product review mostly about? (llm_classify)
SELECT id, llm_classify('Product: {name}
Review: {text}
What is this review mostly about?', ['quality', 'price', 'shipping', 'size', 'other'], name, text) AS topic
FROM products
WHERE id > $offset AND id <= $offset + $rows;
