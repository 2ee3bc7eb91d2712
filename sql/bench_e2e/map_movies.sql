-- table: rotten
-- generated: verdict
-- A short verdict per review, with the movie's synopsis first (rows of one movie share it: llm_map)
SELECT id, llm_map('Movie synopsis: {synopsis}
Critic review: {review}
In at most six words, what did the critic think of the movie?', synopsis, review, llm_options(max_tokens := 10)) AS verdict
FROM rotten
WHERE id > $offset AND id <= $offset + $rows;
