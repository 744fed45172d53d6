"""What a study's numbers support: the h × seed-block tests of each h against h=8 for cross-entropy and
BLEU, their sensitivity (resampling seeds, one run left out) and calibration by simulation, and the
interaction tests of a varied study with the covariance between its cells."""
