-- GPU activities in the report scope (the --steps filter is substituted for {where}).
SELECT * FROM gpu_activities WHERE {where}
