-- table: critics
-- labels: focus
-- What each critic's review is mainly about (llm_classify over critic, outlet, genre and review)
SELECT id, llm_classify('Genres: {genres}
Director: {director}
{critic} ({publisher}) wrote: {review}
What does this review mainly talk about?', ['the acting', 'the story', 'the direction', 'the humour', 'the visuals', 'the film as a whole'],
    genres, director, critic, publisher, review) AS focus
FROM critics
WHERE id > $offset AND id <= $offset + $rows;
