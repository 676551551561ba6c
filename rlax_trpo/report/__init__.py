"""Reports: a run's own files (metrics.csv, summary.json, plots and the lines printed at its
end), statistics over seeds, and `rlax-trpo report` over many runs.

    run_files  metrics.csv, summary.json's figures, learning curves, the printed outcome
    stats      statistics over seeds: final returns, IQM, bootstrap intervals, divergence
    inputs     what `rlax-trpo report` reads: run folders and published JSON
    settings   which inputs ran the same settings: one row, or a row per setting
    aggregate  its numbers, as rliable computes them
    tables     its tables, as markdown: printed and in report.md
    render     its files: report.md, report.json and the figures
    command    its options and the command

Host-side: nothing here imports JAX (the run driver above hands it host arrays).
"""
