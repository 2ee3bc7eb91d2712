-- table: shop
-- labels: audience
-- Who each product is for, from its name alone (llm_classify: short prompts, labels of several tokens)
SELECT id, llm_classify('Product: {product}
Who is this product mainly for?', ['home office workers', 'car owners', 'people caring for their health', 'families with children', 'hobbyists and crafters'], product) AS audience
FROM shop
WHERE id > $offset AND id <= $offset + $rows;
