"""nbgrader's steps and this course's plugins: intake, execution, the verdict on check records, the reference runs,
the release and feedback caches, and the nbgrader process that runs them."""
