-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION relserve_fdw" to load this file. \quit

CREATE FUNCTION relserve_fdw_handler()
RETURNS fdw_handler
AS 'MODULE_PATHNAME'
LANGUAGE C STRICT;

CREATE FUNCTION relserve_fdw_validator(text[], oid)
RETURNS void
AS 'MODULE_PATHNAME'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER relserve_fdw
  HANDLER relserve_fdw_handler
  VALIDATOR relserve_fdw_validator;
