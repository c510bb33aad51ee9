"""The tuner: search a profile's serving settings on the real server and keep what measurably
helps. Standard library only (it also runs beside a real SGLang on a GPU machine that has none
of the project's dependencies): the search space (space.py), the objective and the judgement of
one trial against the best so far (judge.py), the search itself, replayed from its journal so a
killed search resumes where it stopped (search.py, journal.py), and what a finished search
prints (summary.py)."""
