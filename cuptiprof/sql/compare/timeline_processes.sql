-- timeline_processes: who each timeline lane belongs to (every process of the file)
-- run_id: run inside the file
-- pid: process
-- run_label: the run's label (the file stem for a single run)
-- runs: runs in the file (a lane names its run only where there are several)
-- host: host name of the process
-- rank: global rank, NULL when unknown
SELECT p.run_id, p.pid, r.label AS run_label, (SELECT count(*) FROM runs) AS runs, p.host, p.rank
FROM processes p LEFT JOIN runs r USING (run_id)
ORDER BY p.run_id, p.pid
