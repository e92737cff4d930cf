-- copy_peak_of(direction): which peak bounds a copy of that direction ('HtoD', 'DtoD', 'PtoP', ...): 'host link' for copies to or from host memory (PCIe or C2C), 'nvlink' for peer copies, 'device memory' (DRAM) for the rest; NULL direction: 'device memory'
CASE WHEN direction IN ('HtoD', 'DtoH', 'HtoA', 'AtoH', 'HtoH') THEN 'host link'
     WHEN direction = 'PtoP' THEN 'nvlink' ELSE 'device memory' END
