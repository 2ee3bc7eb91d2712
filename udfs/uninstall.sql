-- Remove the relserve functions (run in the schema they were installed in).
DROP FUNCTION IF EXISTS llm_map(text, text[]);
DROP FUNCTION IF EXISTS llm_map(text, jsonb);
DROP FUNCTION IF EXISTS llm_filter(text, text[]);
DROP FUNCTION IF EXISTS llm_filter(text, jsonb);
DROP FUNCTION IF EXISTS llm_classify(text, text[], text[]);
DROP FUNCTION IF EXISTS llm_classify(text, text[], jsonb);
DROP FUNCTION IF EXISTS llm_extract(text, jsonb, text[]);
DROP FUNCTION IF EXISTS llm_map_query(text, text, jsonb);
DROP FUNCTION IF EXISTS llm_filter_query(text, text, jsonb);
DROP FUNCTION IF EXISTS llm_classify_query(text, text[], text, jsonb);
DROP FUNCTION IF EXISTS llm_extract_query(text, jsonb, text, jsonb);
DROP FUNCTION IF EXISTS relserve._load();
DROP SCHEMA IF EXISTS relserve;
