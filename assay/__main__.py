from assay.entry import main

main()
