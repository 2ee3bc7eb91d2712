-- The tables of the end-to-end benchmark (bench/bench_e2e.py), read from the shared datasets
-- folder ($datasets), never copied: the first 3,000 rows of each, numbered in file order.
-- rows: 3000
CREATE OR REPLACE TABLE rotten AS
SELECT row_number() OVER () AS id, movie_id, review_content AS review, left(movie_info, 400) AS synopsis
FROM (SELECT * FROM read_parquet('$datasets/rotten_tomatoes.parquet') WHERE review_content IS NOT NULL AND movie_info IS NOT NULL LIMIT 3000);

CREATE OR REPLACE TABLE products AS
SELECT row_number() OVER () AS id, left(name, 120) AS name, left(text, 500) AS text, rating
FROM (SELECT * FROM read_parquet('$datasets/amazon_reviews.parquet') WHERE text IS NOT NULL AND name IS NOT NULL LIMIT 3000);

CREATE OR REPLACE TABLE beers AS
SELECT row_number() OVER () AS id, beer_name, style, left(review_text, 400) AS review
FROM (SELECT * FROM read_parquet('$datasets/beer_reviews.parquet') WHERE review_text IS NOT NULL LIMIT 3000);
