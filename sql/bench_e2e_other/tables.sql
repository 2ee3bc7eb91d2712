-- The tables of the end-to-end benchmark's second workload (bench/bench_e2e.py --workload other):
-- tables, templates and prompt/answer lengths that the first workload does not use, read from the
-- shared datasets folder ($datasets), never copied; the first 1,000 rows of each, numbered in file order.
-- rows: 1000
CREATE OR REPLACE TABLE films AS
SELECT row_number() OVER () AS id, movie_title AS title, left(movie_info, 700) AS plot,
       nullif(review_content, '') AS review
FROM (SELECT * FROM read_parquet('$datasets/movies_small.parquet') WHERE movie_info IS NOT NULL LIMIT 1000);

CREATE OR REPLACE TABLE ratings AS
SELECT row_number() OVER () AS id, "beer/name" AS beer, "beer/style" AS style,
       "review/overall" AS overall, "review/taste" AS taste, "review/palate" AS palate
FROM (SELECT * FROM read_parquet('$datasets/beer_ratings.parquet') LIMIT 1000);
