"""What a grading run reports: the results table, grades.csv, the class report and the feedback pages."""
