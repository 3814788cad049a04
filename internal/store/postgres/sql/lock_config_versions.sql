-- Held until the transaction ends: a second RecordConfig waits here, then
-- tests against what the first recorded (each statement of a READ
-- COMMITTED transaction sees what committed before it began). The mode
-- conflicts with itself and with writes, not with reads.
LOCK TABLE sluice_config_versions IN SHARE ROW EXCLUSIVE MODE;
