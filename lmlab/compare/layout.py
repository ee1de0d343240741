"""The files of a comparison directory, named once for the lab that writes them and the
tools that read them (the report page, `lmlab serve`)."""

DESIGN = "design.json"  # what was asked; a second run of the command must ask the same
RECORD = "comparison.json"  # the results, with the data's and the code's hashes
REPORT = "report.html"  # the page a person opens; everything it shows is inside it
