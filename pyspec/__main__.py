from pyspec.tools.cli import main

raise SystemExit(main())
