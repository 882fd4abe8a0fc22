"""The vocabulary every protocol's lab side speaks, below the providers: neutral replies
(`reply`), scripted turns and their faults (`script`), scenarios and what they must show
(`scenario`), and the seam a protocol renders them through (`renderer`). The lab, which runs
them through the providers, lives above (`lockgate.lab`)."""
