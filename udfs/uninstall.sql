-- Remove the relserve functions (run in the schema they were installed in), and the schema relserve
-- with its configuration and the roles' keys.
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
DROP FUNCTION IF EXISTS relserve.fdw_scan(text, text, text, text, jsonb, text, text, text[]);
DROP FUNCTION IF EXISTS relserve.fdw_cancel(text, text, text);
DROP FUNCTION IF EXISTS relserve.fdw_plan(text, text, text, text, jsonb, text, text, text[]);
DROP FUNCTION IF EXISTS relserve._load();
DROP VIEW IF EXISTS relserve.my_api_key;
DROP TABLE IF EXISTS relserve.api_keys;
DROP TABLE IF EXISTS relserve.config;
DROP SCHEMA IF EXISTS relserve;
