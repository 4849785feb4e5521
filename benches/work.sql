-- The sqlite workload (ci/measure.py writes it with :N replaced by the row count).
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, payload BLOB, grp INT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < :N)
  INSERT INTO t SELECT x, printf('%08x-%d', (x * 2654435761) % 4294967291, x), zeroblob(16 + (x * 7919) % 1000), x % 97 FROM c;
CREATE INDEX t_name ON t(name);
SELECT grp, count(*), sum(length(payload)) FROM t GROUP BY grp ORDER BY 2 DESC, 1 LIMIT 3;
UPDATE t SET payload = zeroblob(32 + (id * 31) % 2000), name = name || '-u' WHERE id % 3 = 0;
DELETE FROM t WHERE id % 5 = 0;
SELECT count(*), max(name) FROM t WHERE name LIKE '1%';
SELECT length(group_concat(name, ',')) FROM (SELECT name FROM t ORDER BY payload, name);
