-- The tables of the end-to-end benchmark's third workload (bench/bench_e2e.py --workload third):
-- built after the other two workloads and the defaults were settled, and used to tune nothing.
-- Read from the shared datasets folder ($datasets), never copied: 1,000 rows of each, taken from
-- file row 3000 on (src_row, 0-based), past every row the main workload (file rows 0-2999) and the
-- second one (movies_small, beer_ratings) read, with columns neither uses (review titles,
-- critics and publishers, genres, directors, breweries and regions) and longer review
-- text (up to 1,200 characters where the main workload cuts at 500). Numbered in file order.
-- rows: 1000
CREATE OR REPLACE TABLE shop AS
SELECT row_number() OVER (ORDER BY src_row) AS id, src_row, left(name, 150) AS product, title AS headline,
       left(text, 1200) AS body
FROM (SELECT *, file_row_number AS src_row
      FROM read_parquet('$datasets/amazon_reviews.parquet', file_row_number := true)
      WHERE file_row_number >= 3000 AND name <> '' AND title <> '' AND text <> ''
      ORDER BY file_row_number LIMIT 1000);

CREATE OR REPLACE TABLE critics AS
SELECT row_number() OVER (ORDER BY src_row) AS id, src_row, movie_id, critic, publisher, review_content AS review,
       coalesce(nullif(genres, ''), 'unknown') AS genres,
       coalesce(nullif(director, ''), 'unknown') AS director
FROM (SELECT *, file_row_number AS src_row
      FROM read_parquet('$datasets/rotten_tomatoes.parquet', file_row_number := true)
      WHERE file_row_number >= 3000 AND review_content <> '' AND critic <> ''
      ORDER BY file_row_number LIMIT 1000);

CREATE OR REPLACE TABLE brews AS
SELECT row_number() OVER (ORDER BY src_row) AS id, src_row, beer_name AS beer, brewery, region, style,
       left(review_text, 600) AS review
FROM (SELECT *, file_row_number AS src_row
      FROM read_parquet('$datasets/beer_reviews.parquet', file_row_number := true)
      WHERE file_row_number >= 3000 AND review_text <> '' AND brewery <> ''
      ORDER BY file_row_number LIMIT 1000);
