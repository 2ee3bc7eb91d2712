-- table: films
-- filter: rows
-- generated: reason
-- The films whose review pans them, and why (llm_filter on the review, then llm_map with the plot)
SELECT id, llm_map('Title: {title}
Plot: {plot}
Review: {review}
In one sentence, why did the critic dislike it?', title, plot, review, llm_options(max_tokens := 24)) AS reason
FROM (SELECT * FROM films WHERE id > $offset AND id <= $offset + $rows AND review IS NOT NULL) AS f
WHERE llm_filter('Does this critic dislike the film? Review: {review}', review);
