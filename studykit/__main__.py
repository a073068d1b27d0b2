from studykit.cli import main

raise SystemExit(main())
