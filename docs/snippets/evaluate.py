from privnlp.evaluation import audit

# every paired attack, on the undefended system, on the defense and on its deliberately leaky twin
report = audit("phrase_fragmentation", seeds=[0, 1], leaky_twin=True, progress=False)
print(report.to_markdown()[:600])    # claim, attacks x metrics with confidence intervals, utility cost
report.save("reports")               # reports/phrase_fragmentation.{json,md,html}
