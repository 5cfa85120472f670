"""What the measuring tools drive, outside the installed mmvit5 package: the tables generated
from results/ (:mod:`.tables`). Imported by tools run from this checkout, never by mmvit5."""
