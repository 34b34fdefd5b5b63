"""OpenAI's speech-to-text API: ``POST /v1/audio/transcriptions`` and
``/v1/audio/translations`` (a multipart form with the audio file).

The form's fields and the answers' shapes are in :mod:`.protocol`, the translation onto the
engine (decode, windows, one worker request per window) in :mod:`.serving`, the routes in
:mod:`.routes`. A speech recogniser (Whisper) runs in an engine worker of its own, as
embedding models do.
"""
