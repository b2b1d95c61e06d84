-- Schema version 4: exact facts.
-- * `labels.label` and `sessions.name` hold the JSON string literal of the
--   label or name as JSON.stringify writes it, so lone UTF-16 surrogates
--   survive (pi returns them as stored).
-- * The statistics in `sessions` are summed from correctly rounded numbers
--   (earlier builds read 17-digit costs such as 0.011844299999999999 one ulp off).
-- Both are rewritten by code from a replay of each session's log, in the same
-- transaction as this file (src/backend/sqlite/writer.rs,
-- refresh_all_session_facts); no table changes shape.
SELECT 1;
