"""Stage ``intake``: read a download of submissions and place the work in submitted/ (:mod:`.submissions`),
in the download's shape (:mod:`.shapes`), its archives opened within bounds (:mod:`.archives`), students mapped
to course ids (:mod:`.roster`)."""
